//! `oshrun`: start an OpenSHMEM / gsas job on this machine; see `gsas::launch`.

fn main() {
    gsas::launch::main("oshrun")
}
