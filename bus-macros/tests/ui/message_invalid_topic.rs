use llbus::Message;

#[derive(Message)]
#[message(topic = "md quote")]
struct Quote {
    px: f64,
}

fn main() {
    let _ = Quote::TOPIC_ID;
}
