use llbus::Message;

struct Venue {
    mic: u32,
}

#[derive(Message)]
#[message(topic = "md.quote")]
struct Quote {
    px: f64,
    venue: Venue,
    qty: u32,
}

fn main() {
    let _ = Quote::TOPIC_ID;
}
