use llbus::Message;

#[derive(Message)]
#[message(topc = "md.quote")]
struct Quote {
    px: f64,
}

fn main() {
    // The impl is still there: no second error here.
    let _ = Quote::TOPIC_ID;
}
