use llbus::Message;

#[derive(Message)]
#[message]
struct Quote {
    px: f64,
}

fn main() {
    let _ = Quote::TOPIC_ID;
}
