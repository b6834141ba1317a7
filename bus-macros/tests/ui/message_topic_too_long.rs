use llbus::Message;

#[derive(Message)]
#[message(topic = "md.quote.a-very-long-topic-name-that-goes-on-and-on-past-the-limit")]
struct Quote {
    px: f64,
}

fn main() {
    let _ = Quote::TOPIC_ID;
}
