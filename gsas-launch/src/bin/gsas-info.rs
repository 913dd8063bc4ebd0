//! `gsas-info` (also installed as `oshmem_info`): what this installation of gsas is; see
//! `gsas_launch::info`.

fn main() {
    let name = std::env::args()
        .next()
        .as_deref()
        .and_then(|a| {
            std::path::Path::new(a)
                .file_name()?
                .to_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "gsas-info".to_owned());
    std::process::exit(gsas_launch::info::main(&name, std::env::args().skip(1)))
}
