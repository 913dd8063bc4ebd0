//! Discovery and sysfs parsing against fabricated trees.

mod common;

use std::fs;

use common::{Tree, exanet_maps, map};
use uio_driver::{UioErrorKind, UioPaths, fabricate};

#[test]
fn finds_device_by_name_among_several() {
    let tree = Tree::new("find");
    tree.add(0, "axi-dma", &[map(0, Some("ctrl"), 0x10000, 0)]);
    tree.add(2, "exanet-ep0", &exanet_maps());
    tree.add(10, "exanet-ep1", &exanet_maps());
    // Entries that are not uioN are ignored.
    fs::create_dir_all(tree.sysfs().join("uioX")).unwrap();
    fs::write(tree.sysfs().join("README"), "not a device").unwrap();

    let dev = tree.paths.find("exanet-ep1").unwrap();
    assert_eq!(dev.index(), 10);
    assert_eq!(dev.name(), "exanet-ep1");
    assert_eq!(dev.version(), "devicetree");
    assert_eq!(dev.dev_path(), tree.dev().join("uio10"));
    assert_eq!(dev.sysfs_dir(), tree.sysfs().join("uio10"));
    assert_eq!(dev.maps(), exanet_maps().as_slice());
    assert_eq!(dev.map(1).unwrap().name.as_deref(), Some("mbox"));
    assert_eq!(dev.map(1).unwrap().size, 0x2000);
    assert_eq!(dev.map(3).unwrap().addr, 0xa004_0000);

    assert_eq!(
        tree.paths.list().unwrap(),
        vec![
            (0, "axi-dma".to_owned()),
            (2, "exanet-ep0".to_owned()),
            (10, "exanet-ep1".to_owned())
        ]
    );
    assert_eq!(tree.paths.open_index(2).unwrap().name(), "exanet-ep0");
}

#[test]
fn not_found_lists_what_was_seen() {
    let tree = Tree::new("notfound");
    tree.add(0, "axi-dma", &[]);
    tree.add(3, "exanet-ep0", &[]);
    let err = tree.paths.find("exanet-ep7").unwrap_err();
    match err.kind() {
        UioErrorKind::NotFound { seen } => assert_eq!(
            seen,
            &vec![(0, "axi-dma".to_owned()), (3, "exanet-ep0".to_owned())]
        ),
        other => panic!("unexpected {other:?}"),
    }
    let text = err.to_string();
    assert!(text.starts_with("uio device \"exanet-ep7\" ("), "{text}");
    assert!(
        text.ends_with("not found; devices seen: uio0 \"axi-dma\", uio3 \"exanet-ep0\""),
        "{text}"
    );
}

#[test]
fn duplicate_names_resolve_to_lowest_index() {
    let tree = Tree::new("dup");
    tree.add(4, "same", &[]);
    tree.add(1, "same", &[]);
    assert_eq!(tree.paths.find("same").unwrap().index(), 1);
    assert_eq!(tree.paths.open_index(4).unwrap().index(), 4);
}

#[test]
fn parses_kernel_formats_and_missing_map_name() {
    let tree = Tree::new("formats");
    let dir = tree.add(
        0,
        "dev",
        &[map(0, None, 0x1000, 0), map(1, Some("b"), 0x1000, 0)],
    );
    // Older kernels print 8 hex digits; uppercase prefix and no prefix are accepted.
    fs::write(dir.join("maps/map1/size"), "0x00002000\n").unwrap();
    fs::write(dir.join("maps/map1/addr"), "0XA0012000\n").unwrap();
    fs::write(dir.join("maps/map1/offset"), "40\n").unwrap();
    let dev = tree.paths.find("dev").unwrap();
    assert_eq!(dev.maps().len(), 2);
    assert_eq!(dev.map(0).unwrap().name, None);
    let m1 = dev.map(1).unwrap();
    assert_eq!((m1.size, m1.addr, m1.offset), (0x2000, 0xa001_2000, 0x40));
}

#[test]
fn device_without_maps_dir_has_no_maps() {
    let tree = Tree::new("nomaps");
    tree.add(0, "bare", &[]);
    let dev = tree.paths.find("bare").unwrap();
    assert!(dev.maps().is_empty());
    match dev.map(0).unwrap_err().kind() {
        UioErrorKind::NoSuchMap { index, available } => {
            assert_eq!(*index, 0);
            assert!(available.is_empty());
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn invalid_hex_names_device_file_and_value() {
    let tree = Tree::new("badhex");
    let dir = tree.add(3, "exanet-ep0", &exanet_maps());
    let size = dir.join("maps/map1/size");
    fs::write(&size, "0xZZ\n").unwrap();
    let err = tree.paths.find("exanet-ep0").unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::InvalidHex { value } if value == "0xZZ"));
    assert_eq!(err.path(), Some(size.as_path()));
    assert_eq!(
        err.to_string(),
        format!(
            "uio device \"exanet-ep0\" ({}): invalid hex value \"0xZZ\"",
            size.display()
        )
    );
}

#[test]
fn missing_required_map_file_is_an_error() {
    let tree = Tree::new("nooffset");
    let dir = tree.add(0, "dev", &[map(0, Some("regs"), 0x1000, 0)]);
    fs::remove_file(dir.join("maps/map0/offset")).unwrap();
    let err = tree.paths.find("dev").unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::Io(_)));
    assert_eq!(err.path(), Some(dir.join("maps/map0/offset").as_path()));
}

#[test]
fn more_than_five_maps_are_rejected_for_that_device_only() {
    let tree = Tree::new("sixmaps");
    let maps: Vec<_> = (0..6).map(|i| map(i, None, 0x1000, 0)).collect();
    tree.add(0, "greedy", &maps);
    tree.add(1, "fine", &maps[..5]);
    let err = tree.paths.find("greedy").unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::TooManyMaps { index: 5 }));
    assert!(
        err.to_string()
            .contains("map index 5 exceeds the UIO limit of 5 maps")
    );
    assert_eq!(tree.paths.find("fine").unwrap().maps().len(), 5);
    assert_eq!(tree.paths.list().unwrap().len(), 2);
}

#[test]
fn event_count_follows_sysfs() {
    let tree = Tree::new("event");
    let dir = tree.add(0, "dev", &[]);
    let dev = tree.paths.find("dev").unwrap();
    assert_eq!(dev.event_count().unwrap(), 0);
    fabricate::write_event(tree.sysfs(), 0, 41).unwrap();
    assert_eq!(dev.event_count().unwrap(), 41);
    fabricate::write_event(tree.sysfs(), 0, u32::MAX).unwrap();
    assert_eq!(dev.event_count().unwrap(), u32::MAX);
    fs::write(dir.join("event"), "-1\n").unwrap();
    let err = dev.event_count().unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::InvalidDecimal { value } if value == "-1"));
}

#[test]
fn missing_sysfs_root_is_an_io_error_naming_it() {
    let tree = Tree::new("noroot");
    let paths = UioPaths::new(tree.tmp.path().join("absent"), tree.dev());
    let err = paths.find("x").unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::Io(_)));
    assert_eq!(err.path(), Some(tree.tmp.path().join("absent").as_path()));
    assert_eq!(
        UioPaths::system().sysfs_root(),
        std::path::Path::new("/sys/class/uio")
    );
}
