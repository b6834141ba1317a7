use llbus::Message;

struct Level {
    px: f64,
}

#[derive(Message)]
#[message(topic = "md.book")]
struct Book(Vec<Level>, u64);

fn main() {}
