//! A PE started without any process manager runs as a singleton; one started by a PMIx
//! launcher is refused. Real processes, so that `Client::from_env` reads a real
//! environment.

mod pmi_common;

use std::time::Duration;

use gsas::testsupport;
use pmi_common::{child_command, child_entry};

#[test]
fn singleton_without_any_server() {
    child_entry();
    let child = child_command("singleton_without_any_server", "singleton")
        .spawn()
        .unwrap();
    let o = testsupport::collect_output(child, Duration::from_secs(120)).unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("pmi-child singleton ok"),
        "{o:?}"
    );
}

#[test]
fn pmix_launcher_is_refused() {
    child_entry();
    for var in ["PMIX_RANK", "PMIX_VERSION", "PRTE_LAUNCHED"] {
        let child = child_command("pmix_launcher_is_refused", "pmix")
            .env(var, "1")
            .spawn()
            .unwrap();
        let o = testsupport::collect_output(child, Duration::from_secs(120)).unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{var}: {o:?}");
        assert!(
            stdout.contains(&format!("pmi-child refused: PMI: {var} is set"))
                && stdout.contains("PMIx launcher"),
            "{var}: {stdout}"
        );
    }
}
