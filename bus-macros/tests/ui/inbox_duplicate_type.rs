use llbus::{Inbox, Message};

#[derive(Message)]
struct Quote {
    px: f64,
}

#[derive(Inbox)]
enum StrategyIn {
    Quote(Quote),
    AlsoQuote(Quote),
}

fn main() {
    let _ = StrategyIn::from(Quote { px: 1.0 });
}
