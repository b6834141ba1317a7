use llbus::Message;

#[derive(Message)]
union Bits {
    f: f64,
    u: u64,
}

fn main() {}
