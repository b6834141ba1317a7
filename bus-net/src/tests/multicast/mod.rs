//! Multicast data groups over the simulated network: a publisher serves its group's members
//! with one datagram and the deaf (a network that drops multicast) by unicast; members fall
//! back to unicast and back; a member that missed the group frame learns it at the next
//! heartbeat; a reliable group repairs each loss once. Forged and replayed subscribes and
//! forged group data: `forged`.

mod forged;

use super::fleet::{
    addr, data_group, exporter, importer, importer_with, multicast_publisher, node, Net, TOPIC,
};
use super::world::{MAX, MS};
use crate::{BridgeConfig, Event};

#[test]
fn a_group_serves_its_members_with_one_datagram_and_the_deaf_by_unicast() {
    // Subscribers 0 and 2 receive the group; 3 is on a network that drops multicast.
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
        importer(11),
    ]);
    net.w.hosts[3].deaf = true;
    net.run(2000);
    for i in [0, 2, 3] {
        assert_eq!(net.w.hosts[i].joined, [data_group()], "node {i}");
    }
    let table = net.w.hosts[1].ep.publisher().subscribers();
    let via: Vec<bool> = table.iter().map(|s| s.via_group).collect();
    assert_eq!(via.iter().filter(|&&v| v).count(), 2, "{via:?}");
    let (mark, to_group, out) = (
        net.marks(),
        net.to_group(),
        net.w.hosts[1].ep.metrics().datagrams_out.get(),
    );
    net.run(1000);
    // Every subscriber got every message of the second (100), the deaf one included.
    for i in [0, 2, 3] {
        let n = net.got_from(i, 0xa1, mark[i]);
        assert!((99..=101).contains(&n), "node {i}: {n}");
    }
    // 100 data datagrams and 10 heartbeats to the group; by unicast, the deaf subscriber's
    // 100 and every subscriber's heartbeats, acknowledgements and group frames.
    let to_group = net.to_group() - to_group;
    let unicast = net.w.hosts[1].ep.metrics().datagrams_out.get() - out - to_group;
    assert!((105..=115).contains(&to_group), "{to_group}");
    assert!(unicast <= 100 + 3 * 10 + 3 * 3, "{unicast}");
    // No duplicates: a member is not also sent the data by unicast.
    assert_eq!(net.w.hosts[0].ep.loss().duplicates, 0);
}

#[test]
fn a_member_whose_network_stops_multicast_falls_back_to_unicast() {
    let mut net = Net::new(vec![importer(9), multicast_publisher(1, 0xa1)]);
    net.run(2000);
    assert!(net.w.hosts[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
    net.w.hosts[0].deaf = true;
    net.run(1000);
    assert!(!net.w.hosts[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
    let mark = net.marks();
    net.run(500);
    let n = net.got_from(0, 0xa1, mark[0]);
    assert!((49..=51).contains(&n), "{n}");
    // And back to the group once it works again.
    net.w.hosts[0].deaf = false;
    net.run(1000);
    assert!(net.w.hosts[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
}

#[test]
fn a_member_that_lost_the_group_frame_learns_the_group_at_the_next_heartbeat() {
    let mut net = Net::new(vec![importer(9), multicast_publisher(1, 0xa1)]);
    let member = net.w.hosts[0].addr;
    // `Group` frames to it are lost until 1.5 s.
    net.w.path = Some(Box::new(move |now, d| {
        let group_frame = crate::parse_datagram(&d.bytes, MAX)
            .is_ok_and(|mut f| f.any(|f| f.header.kind == crate::Kind::Group));
        !(d.dst == member && now < 1500 * MS && group_frame)
    }));
    net.run(1400);
    // Subscribed and served, by unicast: it was never told the group.
    assert!(net.w.hosts[0].joined.is_empty());
    let table = net.w.hosts[1].ep.publisher().subscribers();
    assert_eq!(table.iter().count(), 1);
    assert!(!table.any_via_group(TOPIC));
    // Every heartbeat to it (each 5 ms here) carries the frame: the first to get through
    // tells it the group, well before its next renewal (each second).
    net.run(300);
    assert_eq!(net.w.hosts[0].joined, [data_group()]);
    assert!(net.w.hosts[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
}

#[test]
fn a_reliable_group_repairs_each_loss_once_for_every_member_that_saw_it() {
    let publisher = {
        let ep = exporter(1, 0xa1, &BridgeConfig::default(), Some(data_group()), true);
        node(addr(1), ep, 0xa1)
    };
    let mut net = Net::new(vec![
        importer_with(9, true),
        publisher,
        importer_with(10, true),
        importer_with(11, true),
        importer_with(12, true),
    ]);
    net.run(1000);
    assert_eq!(
        net.w.hosts[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .filter(|s| s.via_group)
            .count(),
        4
    );
    // About 5% loss per member: half at the sender (all lose it), half on each link.
    net.w.group_loss = (25, 25);
    // A driver that sleeps until `next_deadline` must wake for a queued group repair.
    let mut queued = 0;
    for _ in 0..5000 {
        net.step();
        let ep = &net.w.hosts[1].ep;
        let due = ep.group_repair_deadline();
        if due != u64::MAX {
            queued += 1;
            assert!(
                ep.next_deadline() <= due,
                "a repair due at {due} is not a deadline"
            );
        }
    }
    assert!(queued > 0, "no repair was ever queued");
    net.w.group_loss = (0, 0);
    net.run(1000);
    let published = net.published(1);
    for i in [0, 2, 3, 4] {
        let values: Vec<u64> = net.got(i).iter().map(|(_, v)| v & 0xffff_ffff).collect();
        let first = values[0];
        assert!(
            values.iter().copied().eq(first..=published),
            "node {i}: not every message in order ({} of {})",
            values.len(),
            published - first + 1
        );
    }
    assert!(!net.w.hosts[0]
        .events
        .iter()
        .any(|e| matches!(e, Event::Unrecovered { .. })));
    let repairs = net.w.hosts[1].ep.group_repairs();
    let seen = format!(
        "losses seen {} by 4 members; retransmitted {} to the group, {} NAKs suppressed",
        net.w.group_lost, repairs.sent, repairs.suppressed
    );
    assert!(net.w.group_lost > 50, "{seen}");
    assert!(repairs.sent < net.w.group_lost, "{seen}");
    assert!(repairs.suppressed > 0, "{seen}");
}
