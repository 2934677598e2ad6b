//! The one way Hearth takes a lock.

/// `mutex`'s guard, poisoned or not: every lock in Hearth's controllers guards state that
/// a panic cannot leave half-updated (soft state, or one whole insert or remove at a
/// time), so a panic elsewhere leaves it worth reading.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
