//! `gshrun`: the same launcher as `oshrun` under gsas's own name; see `gsas_launch::launch`.

fn main() {
    gsas_launch::launch::main("gshrun")
}
