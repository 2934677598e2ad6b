//! The FournosCluster API and everything else the Hearth controllers agree on:
//! CRD types, condition helpers, durations, contract names, and the shapes of the
//! Kueue and Fournos objects Hearth reads or writes. Pure data and logic, no I/O.

pub mod calendar;
pub mod cluster;
pub mod conditions;
pub mod crd;
pub mod duration;
pub mod fournosjob;
pub mod kueue;
pub mod kueue_validity;
pub mod names;
pub mod quantity;
pub mod reasons;
pub mod reservation;
pub mod slices;
pub mod text;

pub use cluster::{
    Cordon, ExpiredLock, FournosCluster, FournosClusterSpec, FournosClusterStatus, GpuInfo,
    Hardware, KubeconfigStatus, KueueStatus, SlotHolder, SourceSecret,
};
pub use reservation::{Reservation, ReservationPhase, ReservationSpec, ReservationStatus};
pub use slices::{DiscoveryStatus, KueueSyncStatus, LockManagerStatus};
