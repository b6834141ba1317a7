use llbus::Inbox;

#[derive(Inbox)]
enum StrategyIn {}

fn main() {}
