//! `gsas-atomicd`: the per-node atomic-service daemon; see `gsas::service::daemon`.

fn main() {
    gsas::service::daemon::main()
}
