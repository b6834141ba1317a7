use llbus::Message;

#[derive(Message)]
struct Größe {
    px: f64,
}

fn main() {
    let _ = Größe::TOPIC_ID;
}
