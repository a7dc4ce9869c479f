#![allow(dead_code)]
pub mod chaos_support;
pub mod cluster;
pub mod s3;
