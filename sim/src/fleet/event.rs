//! What happens in a fleet run, in time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

/// Events in time order; ties in the order they were pushed.
///
/// The heap orders small entries (time, sequence, place) and the events wait in a slab: a
/// datagram in flight is a hundred bytes of event, and sifting those through a heap of
/// hundreds of thousands was a tenth of a 1 000-node run.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slab: Vec<Option<Event>>,
    free: Vec<u32>,
    seq: u64,
}

impl EventQueue {
    pub fn push(&mut self, at_us: u64, event: Event) {
        let place = match self.free.pop() {
            Some(p) => {
                self.slab[p as usize] = Some(event);
                p
            }
            None => {
                self.slab.push(Some(event));
                u32::try_from(self.slab.len() - 1).expect("fewer than 2^32 events in flight")
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((at_us, self.seq, place)));
    }

    /// When the next event is due (µs).
    pub fn peek_us(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The next event and when it is due.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let Reverse((at, _, place)) = self.heap.pop()?;
        let event = self.slab[place as usize]
            .take()
            .expect("a queued place holds its event");
        self.free.push(place);
        Some((at, event))
    }
}

#[derive(Debug)]
pub(super) enum Event {
    Deliver {
        to: SocketAddr,
        from: SocketAddr,
        datagram: Vec<u8>,
    },
    Wake {
        slot: usize,
        generation: u64,
    },
    Probe,
    Observe,
    Sample,
    Fault(usize),
    /// The `k`-th replacement of a rolling deploy.
    Replace(usize),
    /// The first start of the node in this slot.
    Boot(usize),
    /// Requests waiting at `slot` for a token (the ledger) look again; those past their wait
    /// are refused.
    Waiting {
        slot: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_the_order_they_went_in() {
        let mut q = EventQueue::default();
        q.push(30, Event::Fault(0));
        q.push(10, Event::Fault(1));
        q.push(30, Event::Fault(2));
        q.push(10, Event::Fault(3));
        let mut out = Vec::new();
        // Places are reused as events leave: pushing in between keeps the order.
        let (at, first) = q.pop().unwrap();
        q.push(20, Event::Fault(4));
        out.push((at, first));
        while let Some(e) = q.pop() {
            out.push(e);
        }
        let order: Vec<(u64, usize)> = out
            .into_iter()
            .map(|(at, e)| match e {
                Event::Fault(i) => (at, i),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(order, [(10, 1), (10, 3), (20, 4), (30, 0), (30, 2)]);
        assert_eq!(q.slab.len(), 4, "a freed place is taken again");
    }
}
