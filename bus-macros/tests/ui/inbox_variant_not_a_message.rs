use llbus::Inbox;

struct Quote {
    px: f64,
}

#[derive(Inbox)]
enum StrategyIn {
    Quote(Quote),
}

fn main() {}
