use llbus::Message;

#[derive(Message)]
#[message(topic = "md.quote")]
#[message(topic = "md.quote2")]
struct Quote {
    px: f64,
}

fn main() {
    assert_eq!(Quote::TOPIC, "md.quote");
}
