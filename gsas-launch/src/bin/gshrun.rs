//! `gshrun`: the same launcher as `oshrun` under gsas's own name; see `gsas_launch::oshrun`.

fn main() {
    gsas_launch::oshrun::main("gshrun")
}
