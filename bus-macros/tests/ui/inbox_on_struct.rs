use llbus::Inbox;

#[derive(Inbox)]
struct StrategyIn {
    px: f64,
}

fn main() {}
