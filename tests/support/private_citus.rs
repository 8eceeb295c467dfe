//! A throwaway Citus cluster: a coordinator and two workers, each a [`PrivateCluster`], so
//! that a test may stop a worker without disturbing any other test. Needs what a private
//! cluster needs, and Citus installed into that PostgreSQL (`../shared/citus/build.sh` on
//! this project's machines, the citus packages elsewhere).

use diesel::{Connection, PgConnection, RunQueryDsl};

use crate::support::private_cluster::PrivateCluster;

/// Settings of every node: Citus loaded, two-phase commit possible, and a transaction left
/// prepared by a node that went away recovered within seconds (the default waits a minute).
const NODE_SETTINGS: &[&str] = &[
    "shared_preload_libraries=citus",
    "max_prepared_transactions=100",
    "citus.recover_2pc_interval=2s",
    "citus.shard_count=4",
];

pub struct PrivateCitus {
    pub coordinator: PrivateCluster,
    pub workers: Vec<PrivateCluster>,
}

impl PrivateCitus {
    /// Err says what is missing.
    pub fn create() -> Result<PrivateCitus, String> {
        let node = || {
            PrivateCluster::create_with(NODE_SETTINGS).ok_or_else(|| {
                "a private PostgreSQL cluster with Citus, which needs root, Debian's \
                 PostgreSQL binaries and Citus installed (../shared/citus/build.sh)"
                    .to_owned()
            })
        };
        let cluster = PrivateCitus {
            coordinator: node()?,
            workers: vec![node()?, node()?],
        };
        for node in cluster.nodes() {
            run(&node.url(), "CREATE EXTENSION citus")?;
        }
        let coordinator = cluster.coordinator.url();
        let port = cluster.coordinator.port();
        run(
            &coordinator,
            &format!("SELECT citus_set_coordinator_host('127.0.0.1', {port})"),
        )?;
        for worker in &cluster.workers {
            let port = worker.port();
            run(
                &coordinator,
                &format!("SELECT citus_add_node('127.0.0.1', {port})"),
            )?;
        }
        Ok(cluster)
    }

    fn nodes(&self) -> impl Iterator<Item = &PrivateCluster> {
        std::iter::once(&self.coordinator).chain(&self.workers)
    }

    /// The port of the node that holds the shard of `group_id`'s rows.
    pub fn node_port_of_group(&self, group_id: i64) -> u16 {
        #[derive(diesel::QueryableByName)]
        struct Placement {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            nodeport: i32,
        }
        let mut conn =
            PgConnection::establish(&self.coordinator.url()).expect("reach the coordinator");
        let found: Vec<Placement> = diesel::sql_query(
            "SELECT nodeport FROM pg_dist_shard_placement \
             WHERE shardid = get_shard_id_for_distribution_column('groups', $1)",
        )
        .bind::<diesel::sql_types::BigInt, _>(group_id)
        .load(&mut conn)
        .expect("the placement of a group's shard");
        let port = found.first().expect("one placement").nodeport;
        u16::try_from(port).expect("a port")
    }
}

fn run(url: &str, statement: &str) -> Result<(), String> {
    let mut conn = PgConnection::establish(url).map_err(|e| format!("{url}: {e}"))?;
    diesel::sql_query(statement)
        .execute(&mut conn)
        .map(drop)
        .map_err(|e| format!("{statement} on {url}: {e}"))
}
