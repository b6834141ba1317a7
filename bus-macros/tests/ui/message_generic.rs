use llbus::Message;

#[derive(Message)]
struct Quote<T> {
    px: T,
}

fn main() {}
