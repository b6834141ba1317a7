use llbus::{Inbox, Message};

#[derive(Message)]
struct Quote {
    px: f64,
}

#[derive(Inbox)]
enum StrategyIn {
    Quote { quote: Quote },
}

fn main() {}
