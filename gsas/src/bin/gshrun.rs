//! `gshrun`: the same launcher as `oshrun` under gsas's own name; see `gsas::launch`.

fn main() {
    gsas::launch::main("gshrun")
}
