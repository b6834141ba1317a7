use llbus::Inbox;

#[derive(Inbox)]
enum StrategyIn<T> {
    Quote(T),
}

fn main() {}
