use llbus::{Inbox, Message};

#[derive(Message)]
struct Quote {
    px: f64,
}

#[derive(Inbox)]
enum StrategyIn {
    Quote(Quote),
    Tick,
}

fn main() {
    // The impl is still there, with the well-formed variants.
    let _ = StrategyIn::from(Quote { px: 1.0 });
}
