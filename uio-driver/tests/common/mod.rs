//! Shared helpers: a self-deleting temporary directory and fabricated UIO trees.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use uio_driver::{MapInfo, UioPaths, fabricate};

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("uio-test-{}-{tag}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A fabricated `/sys/class/uio` + `/dev` pair inside a temp dir.
pub struct Tree {
    pub tmp: TempDir,
    pub paths: UioPaths,
}

impl Tree {
    pub fn new(tag: &str) -> Self {
        let tmp = TempDir::new(tag);
        let sysfs = tmp.path().join("sys/class/uio");
        let dev = tmp.path().join("dev");
        fs::create_dir_all(&sysfs).unwrap();
        fs::create_dir_all(&dev).unwrap();
        Tree {
            paths: UioPaths::new(sysfs, dev),
            tmp,
        }
    }

    pub fn sysfs(&self) -> &Path {
        self.paths.sysfs_root()
    }

    pub fn dev(&self) -> &Path {
        self.paths.dev_root()
    }

    pub fn add(&self, index: u32, name: &str, maps: &[MapInfo]) -> PathBuf {
        fabricate::write_device(self.sysfs(), index, name, "devicetree", maps).unwrap()
    }

    /// Creates `<dev>/uio<index>` as a regular file of `len` bytes filled with `fill`.
    pub fn add_dev_file(&self, index: u32, len: usize, fill: u8) -> PathBuf {
        let path = self.dev().join(format!("uio{index}"));
        fs::write(&path, vec![fill; len]).unwrap();
        path
    }
}

pub fn map(index: usize, name: Option<&str>, size: u64, offset: u64) -> MapInfo {
    MapInfo {
        index,
        name: name.map(str::to_owned),
        addr: 0xa001_0000 + 0x1_0000 * index as u64,
        size,
        offset,
    }
}

/// The exanet-ep layout of the model (section 2).
pub fn exanet_maps() -> Vec<MapInfo> {
    vec![
        map(0, Some("regs"), 0x1000, 0),
        map(1, Some("mbox"), 0x2000, 0),
        map(2, Some("pktz"), 0x1000, 0),
        map(3, Some("rdma"), 0x1000, 0),
    ]
}
