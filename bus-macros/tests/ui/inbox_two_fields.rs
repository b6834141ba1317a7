use llbus::{Inbox, Message};

#[derive(Message)]
struct Quote {
    px: f64,
}

#[derive(Message)]
struct Trade {
    px: f64,
}

#[derive(Inbox)]
enum StrategyIn {
    Both(Quote, Trade),
    Trade(Trade),
}

fn main() {}
