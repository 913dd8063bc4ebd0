//! `oshrun`: start an OpenSHMEM / gsas job on this machine; see `gsas_launch::oshrun`.

fn main() {
    // Installed once: `gshrun` is a link to it (and `shmemrun`, which keeps oshrun's name).
    gsas_launch::oshrun::main(gsas_launch::oshrun::invoked_name())
}
