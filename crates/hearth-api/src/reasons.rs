//! The reasons of each condition type, one enum per type. The strings are part of the
//! contract: DESIGN.md, the README, alerts and the e2e tests compare them, and they are
//! Event reasons and metric labels too. Change none of them.

/// Declares a reason enum with its contract strings: `as_str`, `ALL`, `Display`,
/// [`Reason`](crate::conditions::Reason), and `parse` (the inverse of `as_str`, for
/// reading a stored condition back).
macro_rules! reasons {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every reason, in declaration order.
            pub const ALL: &'static [$name] = &[$( $name::$variant, )+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The reason whose string is `s`, if it is one of these.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|r| r.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl $crate::conditions::Reason for $name {
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }

            fn parse(s: &str) -> Option<Self> {
                $name::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(r: $name) -> String {
                r.as_str().to_owned()
            }
        }
    };
}

reasons! {
    /// Reasons of `KubeconfigValid` (hearth-discovery).
    pub enum KubeconfigValidReason {
        /// `True`: the target answered with these credentials.
        Valid = "Valid",
        Missing = "Missing",
        Invalid = "Invalid",
        Unauthorized = "Unauthorized",
        Unreachable = "Unreachable",
        /// Still `True`: the credentials work but expire within the warning window.
        CredentialsExpiringSoon = "CredentialsExpiringSoon",
        /// Still `True`: the credentials say they have expired, yet the target accepts them.
        CredentialsExpired = "CredentialsExpired",
        /// `False` (`Invalid`), for a Secret that is another cluster's.
        SecretNotForThisCluster = "SecretNotForThisCluster",
        /// `spec.kubeconfigSecret` no longer names the Secret the cluster was created from
        /// (`status.sourceSecret`); the status follows `kubeconfigStatus`.
        KubeconfigSecretChanged = "KubeconfigSecretChanged",
        /// The `fournos.dev/auto-discovered` label was taken off a cluster created from a
        /// Secret; the status follows `kubeconfigStatus`.
        AutoDiscoveredLabelRemoved = "AutoDiscoveredLabelRemoved",
        /// Labeled auto-discovered, but discovery has no record of creating the cluster
        /// (no `status.sourceSecret`): it is never offboarded. The status follows
        /// `kubeconfigStatus`.
        SourceNotRecorded = "SourceNotRecorded",
    }
}

reasons! {
    /// Reasons of `GPUDiscovered` (hearth-discovery).
    pub enum GpuDiscoveredReason {
        Discovered = "Discovered",
        Forbidden = "Forbidden",
        DiscoveryFailed = "DiscoveryFailed",
    }
}

reasons! {
    /// Reasons of `KueueSynced` (hearth-kueue-sync).
    pub enum KueueSyncedReason {
        /// `True`: flavor and entry publish the cluster's quota.
        Synced = "Synced",
        /// `False`: the kubeconfig is not `Valid`; the entry publishes zero quota ("quota
        /// zeroed"). Not [`SchedulableReason::Drained`], a cordoned cluster that runs
        /// nothing any more: the contract gives both the same name.
        Drained = "Drained",
        /// `False`: the flavor is being created (or its old one is still being deleted);
        /// the entry follows.
        WaitingForFlavor = "WaitingForFlavor",
        /// `False`: the ClusterQueue does not exist.
        ClusterQueueNotFound = "ClusterQueueNotFound",
        /// `False`: Kueue's limits leave no room for the entry, or for some GPU models.
        LimitReached = "LimitReached",
        /// `False`: a resource group Hearth does not manage already holds the flavor or a
        /// GPU resource.
        Conflict = "Conflict",
        /// `False`: a flavor of the cluster's name exists without Hearth's label.
        FlavorNotManaged = "FlavorNotManaged",
        /// `False`: the cluster's name cannot be a node-label value.
        InvalidName = "InvalidName",
        /// `False`: a GPU short name does not make a valid resource name.
        InvalidResourceName = "InvalidResourceName",
        /// `False`: hearth-discovery has never counted the cluster's GPUs; it claims no
        /// place in the ClusterQueue until it has.
        WaitingForDiscovery = "WaitingForDiscovery",
        /// `False`: a pool label of the cluster (a key of `HEARTH_POOL_LABEL_KEYS`) has a
        /// value that is not a label value; its flavor carries `none` for it instead.
        InvalidPoolLabel = "InvalidPoolLabel",
        /// `False`: a cluster under takeover, not yet counted by discovery, whose legacy
        /// `spec.hardware` is beyond what the CRD accepts (more than 8 GPU models, or
        /// longer strings; stored before the CRD said so). None of it is read: its entry
        /// publishes its slots and no GPU until discovery has counted it.
        InvalidLegacyHardware = "InvalidLegacyHardware",
    }
}

reasons! {
    /// Reasons of `Schedulable` (hearth-kueue-sync), about `spec.cordon`. Only
    /// `Schedulable` is `True`.
    pub enum SchedulableReason {
        /// `True`: not cordoned; Kueue may admit new Workloads on the cluster.
        Schedulable = "Schedulable",
        /// `False`: cordoned; Workloads Kueue admitted before are still admitted there.
        Cordoned = "Cordoned",
        /// `False`: cordoned, and no Workload is admitted on the cluster's flavor any more
        /// (Hearth's own lock sentinel aside): ready for maintenance.
        Drained = "Drained",
        /// `False`: cordoned past `spec.cordon.until`. The cordon stays until a person
        /// lifts it (`kubectl fournos uncordon`) or extends it.
        CordonOverdue = "CordonOverdue",
    }
}

reasons! {
    /// Reasons of `Locked` (hearth-lock-manager). Only `Held` is `True`.
    pub enum LockedReason {
        Held = "Held",
        WaitingForAdmission = "WaitingForAdmission",
        WaitingForFlavor = "WaitingForFlavor",
        Expired = "Expired",
        Released = "Released",
        /// `spec.owner` is one the CRD refuses today but an older CRD stored.
        InvalidOwner = "InvalidOwner",
        /// The apiserver refused the sentinel.
        SentinelCreateFailed = "SentinelCreateFailed",
        /// `fournosjob` sentinels: the Workload that held the lock is gone or evicted, or
        /// not as Fournos made it (not pinned to the cluster, fewer slots than Fournos asks).
        WorkloadLost = "WorkloadLost",
        /// `fournosjob` sentinels: the Workload requests fewer slots than the cluster has.
        SlotsMismatch = "SlotsMismatch",
        /// `fournosjob` sentinels: a Workload of the sentinel's name still exists (Fournos
        /// would adopt it); no sentinel is created until it is gone.
        WaitingForRelease = "WaitingForRelease",
        /// `fournosjob` sentinels: unlocked, but a sentinel or its Workload still holds
        /// quota.
        Releasing = "Releasing",
        /// `fournosjob` sentinels: Fournos has not given the sentinel a phase in time.
        SentinelNotPickedUp = "SentinelNotPickedUp",
        /// The sentinel's name, or for `fournosjob` sentinels the name Fournos gives its
        /// Workload, is taken by an object this Hearth did not create or record (its
        /// labels prove nothing): it is named, and left alone.
        SentinelNameTaken = "SentinelNameTaken",
        /// The sentinel is admitted, but not in the cluster's ClusterQueue on the
        /// cluster's own ResourceFlavor: it holds nothing on this cluster.
        WrongFlavor = "WrongFlavor",
        /// `fournosjob` sentinels: the Workload of the sentinel's name is not proven to
        /// be the one Fournos made for it (labelled with the job, owned by its UID, not
        /// older than it, its slots readable): it is named, and never trusted to hold.
        WorkloadNotProven = "WorkloadNotProven",
    }
}

reasons! {
    /// Reasons of a Reservation's `Accepted` (hearth-lock-manager).
    pub enum AcceptedReason {
        /// It holds the window its spec asks for.
        Accepted = "Accepted",
        /// Its window overlaps one an accepted reservation of the cluster holds.
        Conflict = "Conflict",
        /// It keeps the window it held; the longer one its owner asked for overlaps
        /// another accepted reservation.
        LengtheningRefused = "LengtheningRefused",
        /// Its stored spec is one the CRD refuses today (an end not after its start).
        InvalidWindow = "InvalidWindow",
        /// Its window had ended when it was first decided.
        Ended = "Ended",
        /// The cluster has too many reservations whose windows have not ended
        /// (hearth-lock-manager's `MAX_LIVE_BOOKINGS`).
        TooMany = "TooMany",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<R: crate::conditions::Reason + Copy>(all: &[R]) {
        let mut seen = std::collections::BTreeSet::new();
        for r in all.iter().map(|r| r.as_str()) {
            assert!(
                !r.is_empty() && r.chars().all(|c| c.is_ascii_alphanumeric()),
                "{r}"
            );
            assert!(r.starts_with(|c: char| c.is_ascii_uppercase()), "{r}");
            assert!(seen.insert(r), "{r} twice");
        }
    }

    #[test]
    fn reasons_are_camel_case_distinct_and_parse_back() {
        check(KubeconfigValidReason::ALL);
        check(GpuDiscoveredReason::ALL);
        check(KueueSyncedReason::ALL);
        check(AcceptedReason::ALL);
        check(LockedReason::ALL);
        check(SchedulableReason::ALL);
        for r in LockedReason::ALL {
            assert_eq!(LockedReason::parse(r.as_str()), Some(*r));
        }
        assert_eq!(LockedReason::parse("held"), None);
    }

    #[test]
    fn contract_strings() {
        // DESIGN.md names these; alerts and e2e tests compare them.
        assert_eq!(
            LockedReason::ALL[..5]
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
            [
                "Held",
                "WaitingForAdmission",
                "WaitingForFlavor",
                "Expired",
                "Released"
            ]
        );
        assert_eq!(GpuDiscoveredReason::Forbidden.as_str(), "Forbidden");
        assert_eq!(
            KueueSyncedReason::ClusterQueueNotFound.as_str(),
            "ClusterQueueNotFound"
        );
        assert_eq!(KubeconfigValidReason::Unreachable.as_str(), "Unreachable");
    }
}
