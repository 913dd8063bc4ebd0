//! gsas-core: the `no_std` protocol core of gsas.
//!
//! (Crate documentation is completed together with the modules.)
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod reliable;
pub mod service;
pub mod symheap;
pub mod transport;
pub mod wire;
