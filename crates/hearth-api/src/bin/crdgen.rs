//! Prints a CRD generated from the Rust types: `crdgen` the FournosCluster CRD
//! (`manifests/crd.yaml`), `crdgen reservation` the Reservation CRD
//! (`manifests/reservation-crd.yaml`). `just crdgen` writes both.

fn main() {
    let kind = std::env::args().nth(1);
    let yaml = match kind.as_deref() {
        None | Some("fournoscluster") => hearth_api::crd::fournos_cluster_crd_yaml(),
        Some("reservation") => hearth_api::crd::reservation_crd_yaml(),
        Some(other) => {
            eprintln!("crdgen: no CRD named {other:?}; say fournoscluster or reservation");
            std::process::exit(2);
        }
    };
    match yaml {
        Ok(yaml) => print!("{yaml}"),
        Err(e) => {
            eprintln!("crdgen: cannot serialize the CRD: {e}");
            std::process::exit(1);
        }
    }
}
