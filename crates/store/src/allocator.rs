//! SQLite's memory: mimalloc, as for the rest of the daemon, and no global statistics.
//!
//! The bundled SQLite calls glibc's `malloc` directly, not Rust's global allocator, and by
//! default counts every allocation under one global mutex (`SQLITE_CONFIG_MEMSTATUS`, which
//! only `sqlite3_status` reads, and Canopy never does). In the store's writer that was an
//! eighth of its time: glibc's `malloc`/`free` and the mutex around each call. Both are set
//! once, before the first connection initializes the library; set later, SQLite refuses them
//! and keeps its defaults (which still work).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

// SAFETY (every function below): SQLite calls them only as its allocator, with sizes it
// checked to be positive and pointers it got from these same functions.

unsafe extern "C" fn malloc(size: c_int) -> *mut c_void {
    // SAFETY: see above; mimalloc returns 16-byte aligned memory (SQLite needs 8).
    unsafe { libmimalloc_sys::mi_malloc(usize::try_from(size).unwrap_or(0)) }
}

unsafe extern "C" fn free(block: *mut c_void) {
    // SAFETY: see above.
    unsafe { libmimalloc_sys::mi_free(block) }
}

unsafe extern "C" fn realloc(block: *mut c_void, size: c_int) -> *mut c_void {
    // SAFETY: see above.
    unsafe { libmimalloc_sys::mi_realloc(block, usize::try_from(size).unwrap_or(0)) }
}

unsafe extern "C" fn size(block: *mut c_void) -> c_int {
    // SAFETY: see above.
    let usable = unsafe { libmimalloc_sys::mi_usable_size(block) };
    c_int::try_from(usable).unwrap_or(c_int::MAX)
}

unsafe extern "C" fn roundup(size: c_int) -> c_int {
    // SAFETY: mi_good_size only computes.
    let good = unsafe { libmimalloc_sys::mi_good_size(usize::try_from(size).unwrap_or(0)) };
    c_int::try_from(good).unwrap_or(size)
}

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn shutdown(_: *mut c_void) {}

/// Configures the SQLite library once per process, before any connection is opened; true when
/// SQLite took the configuration (false: it was initialized before).
pub(super) fn configure() -> bool {
    static TAKEN: OnceLock<bool> = OnceLock::new();
    *TAKEN.get_or_init(|| {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(malloc),
            xFree: Some(free),
            xRealloc: Some(realloc),
            xSize: Some(size),
            xRoundup: Some(roundup),
            xInit: Some(init),
            xShutdown: Some(shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: sqlite3_config is called before the library is initialized (or it answers
        // SQLITE_MISUSE and changes nothing); SQLITE_CONFIG_MALLOC copies the struct, whose
        // functions live for the whole process; SQLITE_CONFIG_MEMSTATUS takes one int.
        let (malloc, memstatus) = unsafe {
            (
                ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &raw const methods),
                ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int),
            )
        };
        let taken = malloc == ffi::SQLITE_OK && memstatus == ffi::SQLITE_OK;
        if !taken {
            tracing::debug!(
                malloc,
                memstatus,
                "SQLite was initialized before the store configured it; it keeps its own allocator"
            );
        }
        taken
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another test of this binary may have initialized SQLite first (an in-memory database);
    /// either way, SQLite allocates from mimalloc exactly when it took the configuration.
    #[test]
    fn sqlite_allocates_from_mimalloc_once_configured() {
        let taken = configure();
        // SAFETY: a block from sqlite3_malloc, asked about and given back with sqlite3_free.
        unsafe {
            let block = ffi::sqlite3_malloc(100);
            assert!(!block.is_null());
            assert_eq!(libmimalloc_sys::mi_is_in_heap_region(block), taken);
            assert!(ffi::sqlite3_msize(block) >= 100);
            ffi::sqlite3_free(block);
        }
        assert_eq!(configure(), taken, "configured once per process");
    }
}
