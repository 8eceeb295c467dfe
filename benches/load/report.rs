//! The report of one engine setup: a table of load runs, the rows written per request, notes,
//! and the key numbers the summary compares across setups. Each scenario module adds its own
//! rows through an `impl EngineReport` of its own.

use crate::args::EngineSetup;
use crate::runner::Measured;
use crate::storage::RowsWritten;

struct Row {
    what: String,
    clients: usize,
    requests: String,
    errors: String,
    throughput: String,
    p50: String,
    p99: String,
}

pub struct EngineReport {
    pub engine: EngineSetup,
    pub description: String,
    rows: Vec<Row>,
    pub storage: Vec<(String, RowsWritten)>,
    pub notes: Vec<String>,
    pub key_numbers: Vec<(String, String)>,
}

pub fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

impl EngineReport {
    pub fn new(engine: EngineSetup, description: String) -> EngineReport {
        EngineReport {
            engine,
            description,
            rows: Vec::new(),
            storage: Vec::new(),
            notes: Vec::new(),
            key_numbers: Vec::new(),
        }
    }

    pub fn row(
        &mut self,
        what: &str,
        clients: usize,
        m: &Measured,
        planned: usize,
        throughput: String,
    ) {
        self.rows.push(Row {
            what: what.to_owned(),
            clients,
            requests: m.requests_text(planned),
            errors: m.errors_text(),
            throughput,
            p50: ms(m.percentile_ms(0.50)),
            p99: ms(m.percentile_ms(0.99)),
        });
    }

    /// A key number "p50 / p99" of the run `m`, in milliseconds.
    pub fn latency_key(&mut self, name: String, m: &Measured) {
        let p50_p99 = format!(
            "{} / {}",
            ms(m.percentile_ms(0.50)),
            ms(m.percentile_ms(0.99))
        );
        self.key_numbers.push((name, p50_p99));
    }

    pub fn key(&mut self, name: String, value: f64) {
        self.key_numbers.push((name, format!("{value:.0}")));
    }

    pub fn print(&self) {
        println!("## {}\n", self.engine.title());
        println!("{}\n", self.description);
        if !self.rows.is_empty() {
            println!("| operation | C | ok / planned | errors | throughput | p50 ms | p99 ms |");
            println!("|---|--:|--:|---|--:|--:|--:|");
            for r in &self.rows {
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    r.what, r.clients, r.requests, r.errors, r.throughput, r.p50, r.p99
                );
            }
            println!();
        }
        if !self.storage.is_empty() {
            self.print_storage();
        }
        for note in &self.notes {
            println!("- {note}");
        }
        if !self.notes.is_empty() {
            println!();
        }
    }

    fn print_storage(&self) {
        let mut tables: Vec<&str> = Vec::new();
        for (_, rows) in &self.storage {
            for table in rows.by_table.keys() {
                if !tables.contains(&table.as_str()) {
                    tables.push(table);
                }
            }
        }
        println!(
            "Rows written per request (requests sent one at a time; every table's row count, \
             and the full rows of `groups` and `group_members`, diffed before and after each):\n"
        );
        let header: Vec<String> = tables.iter().map(|t| format!("`{t}`")).collect();
        println!("| request | samples | {} | total |", header.join(" | "));
        println!("|---|--:|{}--:|", "--:|".repeat(tables.len()));
        for (what, rows) in &self.storage {
            let cells: Vec<String> = tables
                .iter()
                .map(|t| format!("{:.2}", rows.per_request(t)))
                .collect();
            println!(
                "| {what} | {} | {} | **{:.2}** |",
                rows.samples,
                cells.join(" | "),
                rows.total_per_request()
            );
        }
        println!();
    }
}

pub fn print_summary(summaries: &[(EngineSetup, Vec<(String, String)>)]) {
    let Some((_, first)) = summaries.iter().find(|(_, keys)| !keys.is_empty()) else {
        return;
    };
    println!("## Summary\n");
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    println!("| engine | {} |", names.join(" | "));
    println!("|---|{}|", vec!["--:"; names.len()].join("|"));
    for (engine, keys) in summaries {
        let values: Vec<&str> = keys.iter().map(|(_, v)| v.as_str()).collect();
        println!("| {} | {} |", engine.short(), values.join(" | "));
    }
    println!();
}
