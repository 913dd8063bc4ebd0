//! The cluster secret that authenticates remote FORK: loading it from its file, with the
//! checks that keep it secret.
//!
//! What it is: [`Secret::load`] opens the file without following a final symbolic link,
//! and accepts it only if it is a regular file, not readable or writable by group or
//! others (mode 0600 or stricter), owned by the expected user (the daemon's, or the
//! launcher's), and holds at least [`MIN_SECRET_LEN`] bytes after trimming trailing
//! whitespace (at most [`MAX_SECRET_LEN`]). Every refusal says which file and which check
//! failed. The bytes are the HMAC-SHA256 key as they are (any text or binary).
//!
//! What it is not: a key store. The secret lives in process memory for the life of the
//! daemon or launcher and is never printed ([`Secret`]'s `Debug` shows its length only).
//!
//! Thread-safety: [`Secret`] is plain immutable data (`Send + Sync`).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Fewest secret bytes accepted (128 bits).
pub const MIN_SECRET_LEN: usize = 16;
/// Most secret bytes accepted.
pub const MAX_SECRET_LEN: usize = 4096;

/// The cluster secret: the key of the FORK request's HMAC.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Why a secret file was refused.
#[derive(Debug)]
pub struct SecretError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fork secret file {}: {}",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// A secret from bytes (tests, or a key obtained elsewhere). Errors when it is shorter
    /// than [`MIN_SECRET_LEN`] or longer than [`MAX_SECRET_LEN`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Secret, String> {
        if bytes.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the secret has {} bytes; at least {MIN_SECRET_LEN} are needed \
                 (e.g. `head -c 32 /dev/urandom | base64 > FILE`)",
                bytes.len()
            ));
        }
        if bytes.len() > MAX_SECRET_LEN {
            return Err(format!(
                "the secret has {} bytes; at most {MAX_SECRET_LEN} are accepted",
                bytes.len()
            ));
        }
        Ok(Secret(bytes.to_vec()))
    }

    /// Loads the secret from `path`, which must be owned by user `owner` (see the
    /// [module docs](self) for every check).
    pub fn load(path: &Path, owner: u32) -> Result<Secret, SecretError> {
        let fail = |reason: String| SecretError {
            path: path.to_owned(),
            reason,
        };
        let mut file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    fail("is a symbolic link; name the file itself".into())
                } else {
                    fail(format!("cannot be opened: {e}"))
                }
            })?;
        let meta = file
            .metadata()
            .map_err(|e| fail(format!("cannot be examined: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(fail("is not a regular file".into()));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(fail(format!(
                "has mode {mode:04o}; it must not be accessible to group or others \
                 (chmod 600 {})",
                path.display()
            )));
        }
        if meta.uid() != owner {
            return Err(fail(format!(
                "is owned by uid {}, not by uid {owner} (the user of this process)",
                meta.uid()
            )));
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_SECRET_LEN as u64 + 2)
            .read_to_end(&mut bytes)
            .map_err(|e| fail(format!("cannot be read: {e}")))?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        Secret::from_bytes(&bytes).map_err(fail)
    }

    /// The key bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gsas-secret-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, data: &[u8], mode: u32) {
        std::fs::write(path, data).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn good_file_is_loaded_and_trimmed() {
        let d = scratch("good");
        let f = d.join("secret");
        write(&f, b"0123456789abcdef-cluster\n\n", 0o600);
        let s = Secret::load(&f, gsas_sys::process::uid()).unwrap();
        assert_eq!(s.bytes(), b"0123456789abcdef-cluster");
        assert_eq!(format!("{s:?}"), "Secret(24 bytes)");
        write(&f, b"0123456789abcdef", 0o400);
        assert!(Secret::load(&f, gsas_sys::process::uid()).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_check_refuses_with_a_reason() {
        let d = scratch("bad");
        let me = gsas_sys::process::uid();
        let f = d.join("secret");
        let msg = |p: &Path, owner: u32| Secret::load(p, owner).unwrap_err().to_string();
        write(&f, b"0123456789abcdef", 0o644);
        let m = msg(&f, me);
        assert!(m.contains("mode 0644") && m.contains("chmod 600"), "{m}");
        write(&f, b"0123456789abcdef", 0o660);
        assert!(msg(&f, me).contains("mode 0660"));
        write(&f, b"short\n", 0o600);
        assert!(msg(&f, me).contains("at least 16"), "{}", msg(&f, me));
        write(&f, b"0123456789abcdef", 0o600);
        assert!(msg(&f, me.wrapping_add(1)).contains("owned by uid"));
        assert!(msg(&d, me).contains("not a regular file"));
        assert!(msg(&d.join("missing"), me).contains("cannot be opened"));
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(msg(&link, me).contains("symbolic link"));
        write(&f, &vec![b'x'; MAX_SECRET_LEN + 1], 0o600);
        assert!(msg(&f, me).contains("at most"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
