//! `gsas-atomicd`: the per-node atomic-service daemon; see `gsas_launch::daemon`.

fn main() {
    gsas_launch::daemon::main()
}
