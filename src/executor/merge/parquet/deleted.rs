//! Rows deleted by position, as both table formats record them, and which
//! rows of a decoded batch survive them.
//!
//! A deletion vector is framed alike in both: Iceberg's `deletion-vector-v1`
//! Puffin blob and each vector in a Delta deletion-vector file are a
//! big-endian length (of what follows up to the checksum), a magic, a
//! 64-bit Roaring bitmap in the portable layout, and a big-endian CRC-32 of
//! the magic and the bitmap. A Delta vector kept inline in the log is the
//! magic and the bitmap alone.

/// The magic before a deletion vector's bitmap (1681511377, little-endian).
pub const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// The positions of a framed deletion vector that says it deletes
/// `cardinality` rows, sorted.
pub fn parse_frame(blob: &[u8], cardinality: i64) -> Result<Vec<u64>, String> {
    if blob.len() < 12 {
        return Err("shorter than a deletion vector's frame".into());
    }
    let len = u32::from_be_bytes(blob[..4].try_into().expect("4 bytes")) as usize;
    if len + 8 != blob.len() || blob[4..8] != MAGIC {
        return Err("not a deletion vector (its length or magic)".into());
    }
    let body = &blob[4..4 + len];
    let crc = u32::from_be_bytes(blob[4 + len..].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return Err("its CRC-32 does not match".into());
    }
    parse_bitmap(body, cardinality)
}

/// The positions of an unframed deletion vector (the magic, then the
/// bitmap; bytes after the bitmap are ignored) that says it deletes
/// `cardinality` rows, sorted.
pub fn parse_bitmap(body: &[u8], cardinality: i64) -> Result<Vec<u64>, String> {
    if body.len() < 4 || body[..4] != MAGIC {
        return Err("not a deletion vector (its magic)".into());
    }
    let bitmap = roaring::RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| e.to_string())?;
    if bitmap.len() != cardinality.max(0) as u64 {
        return Err(format!("{} positions where the table's metadata says {cardinality}", bitmap.len()));
    }
    Ok(bitmap.iter().collect())
}

/// Clears `keep[i]` for each of `positions` (sorted) that is row
/// `first_row + i` of a batch of `keep.len()` rows; whether any was.
pub fn clear(positions: &[u64], first_row: u64, keep: &mut [bool]) -> bool {
    let lo = positions.partition_point(|p| *p < first_row);
    let hi = positions.partition_point(|p| *p < first_row + keep.len() as u64);
    for p in &positions[lo..hi] {
        keep[(p - first_row) as usize] = false;
    }
    hi > lo
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A framed deletion vector of `positions`.
    pub(crate) fn frame(positions: &[u64]) -> Vec<u8> {
        let bitmap: roaring::RoaringTreemap = positions.iter().copied().collect();
        let mut body = MAGIC.to_vec();
        bitmap.serialize_into(&mut body).unwrap();
        let mut blob = (body.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&body);
        blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        blob
    }

    #[test]
    fn deletion_vectors_are_read_and_damaged_ones_refused_by_name() {
        let far = (1u64 << 33) + 5;
        assert_eq!(parse_frame(&frame(&[0, 7, far]), 3).unwrap(), vec![0, 7, far]);
        let e = parse_frame(&frame(&[1, 2]), 3).unwrap_err();
        assert!(e.contains("metadata says 3"), "{e}");
        let mut flipped = frame(&[1, 2]);
        let n = flipped.len();
        flipped[n - 6] ^= 1;
        assert!(parse_frame(&flipped, 2).unwrap_err().contains("CRC-32"));
        let mut magic = frame(&[1]);
        magic[5] = 0;
        assert!(parse_frame(&magic, 1).unwrap_err().contains("magic"));
        assert!(parse_frame(&[0, 0, 0], 0).unwrap_err().contains("shorter"));
        assert!(parse_frame(&frame(&[1])[..10], 1).is_err());
        let f = frame(&[4, 9]);
        assert_eq!(parse_bitmap(&f[4..f.len() - 4], 2).unwrap(), vec![4, 9]);
        assert!(parse_bitmap(&f[..f.len() - 4], 2).unwrap_err().contains("magic"));
    }

    #[test]
    fn only_the_positions_within_the_batch_clear_its_rows() {
        let mut keep = vec![true; 4];
        assert!(clear(&[1, 9, 10, 12], 8, &mut keep));
        assert_eq!(keep, vec![true, false, false, true]);
        let mut keep = vec![true; 2];
        assert!(!clear(&[1, 9], 2, &mut keep));
        assert_eq!(keep, vec![true, true]);
    }
}
