//! A PE started without any process manager runs as a singleton; one started by a PMIx
//! launcher is refused. Real processes, so that `Client::from_env` reads a real
//! environment.

use std::time::Duration;

use gsas_tests::launch;
use gsas_tests::pmi::child_command;

#[test]
fn singleton_without_any_server() {
    let child = child_command("singleton").spawn().unwrap();
    let o = launch::collect_output(child, Duration::from_secs(120)).unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("pmi-child singleton ok"),
        "{o:?}"
    );
}

#[test]
fn pmix_launcher_is_refused() {
    for var in ["PMIX_RANK", "PMIX_VERSION", "PRTE_LAUNCHED"] {
        let child = child_command("pmix").env(var, "1").spawn().unwrap();
        let o = launch::collect_output(child, Duration::from_secs(120)).unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{var}: {o:?}");
        assert!(
            stdout.contains(&format!("pmi-child refused: PMI: {var} is set"))
                && stdout.contains("PMIx launcher"),
            "{var}: {stdout}"
        );
    }
}
