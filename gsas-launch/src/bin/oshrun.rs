//! `oshrun`: start an OpenSHMEM / gsas job on this machine; see `gsas_launch::launch`.

fn main() {
    gsas_launch::launch::main("oshrun")
}
