//! `oshrun`: start an OpenSHMEM / gsas job on this machine; see `gsas_launch::oshrun`.

fn main() {
    gsas_launch::oshrun::main("oshrun")
}
