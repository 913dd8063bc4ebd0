//! Mapping through the kernel path (a regular file laid out like `/dev/uioN`, map N at
//! `N * page_size`) and through the emulator path (one file per map).

mod common;

use std::fs;
use std::path::Path;

use common::{TempDir, Tree, map};
use uio_driver::{EmuSource, KernelSource, UioErrorKind, UioMapping, UioSource, page_size};

fn file_u32(path: &Path, at: usize) -> u32 {
    let bytes = fs::read(path).unwrap();
    u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn file_u64(path: &Path, at: usize) -> u64 {
    let bytes = fs::read(path).unwrap();
    u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn patch(path: &Path, at: usize, data: &[u8]) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at..at + data.len()].copy_from_slice(data);
    fs::write(path, bytes).unwrap();
}

/// Device "exanet-ep0" at uio3: map0 one page at offset 0; map1 one page whose register
/// block starts 0x100 into the page (current-kernel convention: `size` includes `offset`).
fn kernel_tree(tag: &str) -> (Tree, std::path::PathBuf) {
    let page = page_size() as u64;
    let tree = Tree::new(tag);
    tree.add(
        3,
        "exanet-ep0",
        &[
            map(0, Some("regs"), page, 0),
            map(1, Some("mbox"), page, 0x100),
        ],
    );
    let dev = tree.add_dev_file(3, 2 * page_size(), 0);
    (tree, dev)
}

#[test]
fn kernel_map_applies_page_offset_and_sysfs_offset() {
    let page = page_size();
    let (tree, dev) = kernel_tree("koffset");
    // Known content where map1's register block begins: page + 0x100.
    patch(&dev, page + 0x100 + 0x20, &0x1122_3344u32.to_ne_bytes());
    patch(
        &dev,
        page + 0x100 + 0x28,
        &0x0102_0304_0506_0708u64.to_ne_bytes(),
    );

    let source = KernelSource::open(tree.paths.find("exanet-ep0").unwrap()).unwrap();
    assert_eq!(source.device_name(), "exanet-ep0");
    let mut mbox = source.open_map(1).unwrap();
    assert_eq!(mbox.map_index(), 1);
    assert_eq!(mbox.mapped_len(), page);
    assert_eq!(mbox.len(), page - 0x100);
    assert!(!mbox.is_empty());
    assert_eq!(mbox.path(), dev.as_path());
    assert_eq!(mbox.as_ptr() as usize % page, 0x100);

    assert_eq!(mbox.read32(0x20).unwrap(), 0x1122_3344);
    assert_eq!(mbox.read64(0x28).unwrap(), 0x0102_0304_0506_0708);

    mbox.write32(0x10, 0xdead_beef).unwrap();
    mbox.write64(0x40, 0x8877_6655_4433_2211).unwrap();
    let last = mbox.len() - 4;
    mbox.write32(last, 0x5a5a_a5a5).unwrap();
    // Visible in the backing file at page + sysfs offset + register offset.
    assert_eq!(file_u32(&dev, page + 0x110), 0xdead_beef);
    assert_eq!(file_u64(&dev, page + 0x140), 0x8877_6655_4433_2211);
    assert_eq!(file_u32(&dev, 2 * page - 4), 0x5a5a_a5a5);

    // map0 is the first page and does not see map1's stores.
    let mut regs = source.open_map(0).unwrap();
    assert_eq!(regs.len(), page);
    assert_eq!(regs.read32(0x110).unwrap(), 0);
    regs.write32(0, 0x4558_4e49).unwrap();
    assert_eq!(file_u32(&dev, 0), 0x4558_4e49);
    assert_eq!(file_u32(&dev, page), 0);
}

#[test]
fn bounds_and_alignment_are_errors() {
    let (tree, dev) = kernel_tree("kbounds");
    let source = KernelSource::open(tree.paths.find("exanet-ep0").unwrap()).unwrap();
    let mut m = source.open_map(1).unwrap();
    let len = m.len();

    for (offset, width, result) in [
        (len, 4, m.read32(len).err()),
        (len - 4, 8, m.read64(len - 4).err()),
        (usize::MAX - 1, 4, m.read32(usize::MAX - 1).err()),
        (usize::MAX, 8, m.read64(usize::MAX).err()),
    ] {
        let err = result.expect("out of bounds must fail");
        match err.kind() {
            UioErrorKind::OutOfBounds {
                map,
                offset: o,
                width: w,
                len: l,
            } => assert_eq!((*map, *o, *w, *l), (1, offset, width, len)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(err.device(), "exanet-ep0");
        assert_eq!(err.path(), Some(dev.as_path()));
    }
    assert!(matches!(
        m.write32(len, 1).unwrap_err().kind(),
        UioErrorKind::OutOfBounds { .. }
    ));
    assert!(matches!(
        m.write64(len - 4, 1).unwrap_err().kind(),
        UioErrorKind::OutOfBounds { .. }
    ));

    for err in [
        m.read32(2).unwrap_err(),
        m.read64(4).unwrap_err(),
        m.write32(1, 0).unwrap_err(),
        m.write64(12, 0).unwrap_err(),
    ] {
        assert!(
            matches!(err.kind(), UioErrorKind::Misaligned { map: 1, .. }),
            "{err}"
        );
    }
    let text = m.read64(4).unwrap_err().to_string();
    assert!(
        text.contains("8-byte access at offset 0x4 is not 8-byte aligned"),
        "{text}"
    );
    // Nothing was written by the failed stores.
    assert!(fs::read(&dev).unwrap().iter().all(|b| *b == 0));
}

#[test]
fn alignment_is_checked_on_the_absolute_address() {
    let page = page_size() as u64;
    let tree = Tree::new("kodd");
    tree.add(0, "odd", &[map(0, None, page, 0x102)]);
    tree.add_dev_file(0, page_size(), 0);
    let source = KernelSource::open(tree.paths.find("odd").unwrap()).unwrap();
    let mut m = source.open_map(0).unwrap();
    assert!(matches!(
        m.read32(0).unwrap_err().kind(),
        UioErrorKind::Misaligned { .. }
    ));
    m.write32(2, 0xabcd_0123).unwrap();
    assert_eq!(file_u32(&tree.dev().join("uio0"), 0x104), 0xabcd_0123);
}

#[test]
fn bad_map_layouts_are_refused() {
    let page = page_size() as u64;
    let tree = Tree::new("klayout");
    tree.add(
        0,
        "bad",
        &[
            map(0, None, 0, 0),
            map(1, None, page, page),
            map(2, None, u64::MAX, 0),
        ],
    );
    tree.add_dev_file(0, 3 * page_size(), 0);
    let source = KernelSource::open(tree.paths.find("bad").unwrap()).unwrap();
    for index in 0..3 {
        let err = source.open_map(index).unwrap_err();
        assert!(
            matches!(err.kind(), UioErrorKind::BadMapLayout { .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!("maps/map{index}")),
            "{err}"
        );
    }
    match source.open_map(4).unwrap_err().kind() {
        UioErrorKind::NoSuchMap { index, available } => {
            assert_eq!((*index, available.as_slice()), (4, &[0, 1, 2][..]));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn missing_device_node_names_it() {
    let tree = Tree::new("knode");
    tree.add(5, "ghost", &[]);
    let err = KernelSource::open(tree.paths.find("ghost").unwrap()).unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::Io(_)));
    assert_eq!(err.path(), Some(tree.dev().join("uio5").as_path()));
}

fn maps_of_process() -> String {
    fs::read_to_string("/proc/self/maps").unwrap()
}

#[test]
fn drop_unmaps() {
    let tmp = TempDir::new("drop");
    let dir = tmp.path().join("ep0");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("map0");
    fs::write(&file, vec![0u8; page_size()]).unwrap();
    let source = EmuSource::new("drop-ep", &dir);
    let m = source.open_map(0).unwrap();
    let needle = file.to_str().unwrap().to_owned();
    assert!(maps_of_process().contains(&needle));
    drop(m);
    assert!(!maps_of_process().contains(&needle));
}

/// Generic use, as drivers do.
fn read_id<S: UioSource>(source: &S) -> u32 {
    source.open_map(0).unwrap().read32(0).unwrap()
}

#[test]
fn emu_maps_each_file_at_offset_zero() {
    let tmp = TempDir::new("emu");
    let ep = tmp.path().join("ep2");
    fs::create_dir_all(&ep).unwrap();
    let mut regs = vec![0u8; 0x1000];
    regs[..4].copy_from_slice(&0x4558_4e49u32.to_ne_bytes());
    fs::write(ep.join("map0"), &regs).unwrap();
    fs::write(ep.join("map1"), vec![0u8; 0x2000]).unwrap();
    fs::write(ep.join("map3"), b"").unwrap();

    let source = EmuSource::endpoint(tmp.path(), 2);
    assert_eq!(source.device_name(), "exanet-ep2");
    assert_eq!(source.dir(), ep.as_path());
    assert_eq!(read_id(&source), 0x4558_4e49);

    let mut mbox = source.open_map(1).unwrap();
    assert_eq!((mbox.len(), mbox.mapped_len()), (0x2000, 0x2000));
    mbox.write64(0x1ff8, 0x0123_4567_89ab_cdef).unwrap();
    assert_eq!(file_u64(&ep.join("map1"), 0x1ff8), 0x0123_4567_89ab_cdef);
    assert!(matches!(
        mbox.read32(0x2000).unwrap_err().kind(),
        UioErrorKind::OutOfBounds { .. }
    ));

    // A second mapping of the same map sees the same memory.
    let other: UioMapping = source.open_map(1).unwrap();
    assert_eq!(other.read64(0x1ff8).unwrap(), 0x0123_4567_89ab_cdef);
    // Stores by another party (the emulator) are seen by volatile loads.
    patch(&ep.join("map1"), 0x10, &7u32.to_ne_bytes());
    assert_eq!(mbox.read32(0x10).unwrap(), 7);

    for (index, want_layout) in [(2, false), (3, true), (5, false)] {
        let err = source.open_map(index).unwrap_err();
        if want_layout {
            assert!(
                matches!(err.kind(), UioErrorKind::BadMapLayout { .. }),
                "{err}"
            );
        } else {
            match err.kind() {
                UioErrorKind::NoSuchMap { available, .. } => {
                    assert_eq!(available.as_slice(), &[0, 1, 3]);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(err.path(), Some(ep.join(format!("map{index}")).as_path()));
    }
}
