fn main() {
    // The migrations are embedded with `sqlx::migrate!`; rebuild when they change.
    println!("cargo:rerun-if-changed=../migrations");
}
