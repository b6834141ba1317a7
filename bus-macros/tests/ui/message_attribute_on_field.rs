use llbus::Message;

#[derive(Message)]
struct Quote {
    #[message(topic = "md.quote")]
    px: f64,
}

#[derive(Message)]
enum Side {
    #[message(topic = "md.side")]
    Buy,
    Sell,
}

fn main() {
    let _ = (Quote::TOPIC_ID, Side::TOPIC_ID);
}
