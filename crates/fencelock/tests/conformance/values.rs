//! An election's value is data (issue 31, defect 5), on every deployment that offers
//! elections: any value the API accepts (ending in `:r`, `:w` or `:p`, starting with `=`,
//! with spaces, newlines, NUL, unicode, the longest allowed) is stored, reported, handed
//! over and proclaimed exactly, and a standby with such a value takes over when the leader's
//! holding is lost. Failed before the fix on Redis: when the leader's holding vanished, a
//! standby whose value ends in `:r`, `:w` or `:p` was refused as a read-write lock or a
//! semaphore (its value read as a kind marker) and never led.

use fencelock::{Client, Leader, Leadership, Released, MAX_VALUE_LEN};

use super::{connect, lease, until_more_entries, within, Deployment};

/// Values that look like what the services store beside them: markers, separators, field
/// names, messages, patterns; and the longest value, ending in a marker.
fn values() -> Vec<String> {
    let plain = [
        ":r",
        ":w",
        ":p",
        "x:r",
        "leader:w",
        "1 2 3 ab12:p",
        "ab12",
        "0",
        "=",
        "==",
        "=v",
        "=k",
        "=leader",
        "=grant 1 2 3",
        "",
        " ",
        "two words",
        " leading",
        "trailing ",
        "line\nbreak:w",
        "\r\n",
        "tab\there",
        "nul\0byte",
        "%d+ (.-)$ [^x]",
        "ünïcödé ✓ 🦀:p",
    ];
    let longest = format!("{}:r", "é".repeat((MAX_VALUE_LEN - 2) / 2));
    assert!(longest.len() <= MAX_VALUE_LEN);
    plain
        .iter()
        .map(|v| v.to_string())
        .chain([longest])
        .collect()
}

/// The leader `client` reads, as (value, term).
async fn leader_of(client: &Client, name: &str) -> Option<(String, u64)> {
    let leader: Option<Leader> = client.election(name).leader().await.unwrap();
    leader.map(|l| (l.value, l.term))
}

/// Campaigns for `value` on a task of its own.
fn campaigning(client: &Client, name: &str, value: &str) -> tokio::task::JoinHandle<Leadership> {
    let (election, value) = (client.election(name), value.to_owned());
    tokio::spawn(async move { election.campaign(&value).await.unwrap() })
}

/// Each value, in turn: campaigned for (`leader()` reports it), handed over to a standby
/// that queued with it, and proclaimed; every report is exact, byte for byte.
pub(super) async fn every_value_is_kept_and_handed_over_exactly(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    let (a, b, observer) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let values = values();
    let name = "values";
    for (i, value) in values.iter().enumerate() {
        let next = &values[(i + 1) % values.len()];
        let leading = a.election(name).campaign(value).await.unwrap();
        assert_eq!(leading.value(), value);
        let term = leading.term();
        assert_eq!(
            leader_of(&observer, name).await,
            Some((value.clone(), term))
        );
        let entries = d.entries(name).await.len();
        let standby = campaigning(&b, name, next);
        until_more_entries(d, name, entries).await;
        assert_eq!(leading.resign().await.unwrap(), Released::Released);
        let mut standby = within(10.0, &format!("{next:?} leads"), standby)
            .await
            .unwrap();
        let term = standby.term();
        assert_eq!(leader_of(&observer, name).await, Some((next.clone(), term)));
        standby.proclaim(value).await.unwrap();
        assert_eq!(
            leader_of(&observer, name).await,
            Some((value.clone(), term))
        );
        assert_eq!(standby.resign().await.unwrap(), Released::Released);
    }
    assert_eq!(d.entries(name).await, []);
}

/// A standby queued with a value that ends like a kind marker (and the longest value) takes
/// over when the leader's holding is lost behind its back.
pub(super) async fn a_standby_takes_over_whatever_its_value(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    // A short window for the standby's place: it tries again (and finds the lock free)
    // within a second and a half of the loss.
    let (a, b, observer) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(3_000)).await,
        connect(d, lease(20_000)).await,
    );
    let all = values();
    for value in [":r", "x:w", "1 2 3 ab12:p", all.last().unwrap().as_str()] {
        let name = "values-takeover";
        let leading = a.election(name).campaign("leader").await.unwrap();
        let entries = d.entries(name).await.len();
        let standby = campaigning(&b, name, value);
        until_more_entries(d, name, entries).await;
        d.lose(name).await;
        let standby = within(10.0, &format!("{value:?} takes over"), standby)
            .await
            .unwrap();
        assert!(standby.term() > leading.term());
        let reported = leader_of(&observer, name).await;
        assert_eq!(reported, Some((value.to_owned(), standby.term())));
        drop(leading);
        assert_eq!(standby.resign().await.unwrap(), Released::Released);
        assert_eq!(d.entries(name).await, [], "{value:?}");
    }
}
