//! Tests against a real UIO device. They are ignored by default and run with
//!
//! ```text
//! GSAS_UIO_DEVICE=exanet-ep0 cargo test -p uio-driver --test hardware -- --ignored
//! ```
//!
//! They fail (never pass) when the variable is unset or names a device that is absent.

use std::time::Duration;

use uio_driver::{IrqSource, KernelSource, MAX_MAPS, UioPaths, UioSource};

fn device_name() -> String {
    std::env::var("GSAS_UIO_DEVICE")
        .expect("hardware tests need GSAS_UIO_DEVICE=<UIO device name>, e.g. exanet-ep0")
}

fn open_source() -> KernelSource {
    let name = device_name();
    let device = UioPaths::system()
        .find(&name)
        .unwrap_or_else(|e| panic!("GSAS_UIO_DEVICE names a device that is not usable: {e}"));
    KernelSource::open(device).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
#[ignore = "needs a real UIO device named by GSAS_UIO_DEVICE"]
fn real_device_maps_every_region() {
    let source = open_source();
    let maps = source.device().maps().to_vec();
    assert!(!maps.is_empty(), "{} has no maps", source.device_name());
    assert!(maps.len() <= MAX_MAPS);
    for info in maps {
        let m = source
            .open_map(info.index)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!m.is_empty() && m.len() as u64 <= info.size);
        assert_eq!(
            m.as_ptr() as usize % uio_driver::page_size(),
            info.offset as usize
        );
        m.read32(0).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.read32(m.len()).is_err());
    }
}

#[test]
#[ignore = "needs a real UIO device named by GSAS_UIO_DEVICE"]
fn real_device_irq_enable_wait_and_count() {
    let source = open_source();
    let mut irq = source.irq();
    let before = irq.count().unwrap_or_else(|e| panic!("{e}"));
    irq.enable().unwrap_or_else(|e| panic!("{e}"));
    if let Some(total) = irq
        .wait(Duration::from_millis(200))
        .unwrap_or_else(|e| panic!("{e}"))
    {
        assert_ne!(total, before, "a wakeup must carry a new total");
    }
    let after = irq.count().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        after.wrapping_sub(before) < u32::MAX / 2,
        "event count went backwards"
    );
}
