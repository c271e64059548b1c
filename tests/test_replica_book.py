"""The driver's book of replicas: states stay right when the monitor thread and the
driver see the same task end (a race found in CI)."""

from dbkit.downpour import ReplicaBook
from dbkit.training import ReplicaFigures


class _Future:
    """A finished task whose ``result`` lets the 'monitor' run first, as a thread switch would."""

    def __init__(self, book: ReplicaBook, figures: ReplicaFigures) -> None:
        self.book, self.figures, self.status = book, figures, "pending"

    def result(self, timeout=None):
        if self.status != "finished":
            self.status = "finished"
            self.book.settle_futures()  # the monitor finishes the entry as "stopped" in between
        return self.figures

    def exception(self, timeout=None):
        return None

    def cancel(self):
        pass


def _book(n: int) -> ReplicaBook:
    book = ReplicaBook()
    for i in range(n):
        book.add(i, f"w{i}", _Future(book, ReplicaFigures(i, steps=10 + i, state="stopped")))
    return book


def test_wait_gives_the_asked_state_even_when_the_monitor_finished_first():
    book = _book(2)
    book.wait([0, 1], timeout=5, state="relaid")
    figures = book.figures()
    assert [figures[i].state for i in (0, 1)] == ["relaid", "relaid"]
    assert [figures[i].steps for i in (0, 1)] == [10, 11]
    assert [figures[i].worker for i in (0, 1)] == ["w0", "w1"]
    assert book.live() == []


def test_monitor_alone_marks_ended_tasks_stopped_and_failed_ones_lost():
    book = _book(2)
    book.entries[0].future.status = "finished"
    book.entries[1].future.status = "error"
    book.entries[1].future.exception = lambda timeout=None: RuntimeError("boom")
    book.entries[1].future.cancel = lambda: None
    book.settle_futures()
    assert book.state_of(0) == "stopped" and book.state_of(1) == "lost"
    assert "boom" in book.figures()[1].error and book.figures()[1].failures == 1


def test_wait_marks_a_task_that_raises_lost():
    book = ReplicaBook()

    class Broken:
        status = "pending"

        def result(self, timeout=None):
            raise TimeoutError("no answer")

        def cancel(self):
            pass

    book.add(0, "w0", Broken())
    book.wait([0], timeout=0.1, state="relaid")
    assert book.state_of(0) == "lost" and "no answer" in book.figures()[0].error


def test_a_replica_that_says_it_diverged_or_failed_has_ended():
    book = _book(3)
    book.update(0, ReplicaFigures(0, state="diverged", error="20 non-finite gradients in a row"))
    book.update(1, ReplicaFigures(1, state="paused", steps=4))
    book.update(2, ReplicaFigures(2, state="stopped"))  # a final figure: only its task's end settles it
    assert book.live() == [1, 2] and book.state_of(0) == "diverged" and book.figures()[1].steps == 4
    book.update(0, ReplicaFigures(0, state="running"))  # an ended replica does not come back
    assert book.state_of(0) == "diverged" and book.live_count() == 2


def test_a_replica_that_failed_on_a_machine_found_lost_ends_lost_and_no_other_state_changes():
    book = ReplicaBook()
    for i, state in enumerate(("failed", "stopped", "diverged")):
        task = _Future(book, ReplicaFigures(i, state=state, failures=int(state == "failed"),
                                            error="RuntimeError: no actor" if i == 0 else None))
        task.status = "finished"  # its loop ended on its own
        book.add(i, f"w{i}", task)
    book.settle_futures()
    for i in range(3):
        book.lost_with(i, "w9")
    figures = book.figures()
    assert [figures[i].state for i in range(3)] == ["lost", "stopped", "diverged"]
    assert figures[0].error == "RuntimeError: no actor (worker w9 lost)" and figures[0].failures == 1


def test_replicas_waiting_for_the_warm_start_count_until_launched_and_the_last_leave_first():
    book = _book(1)  # replica 0 trains alone
    book.hold_for_warm_start([1, 2, 3])
    assert book.live_count() == 4 and book.next_index() == 4
    assert book.drop_waiting(2) == [3, 2]  # removed: the most recent first
    assert book.waiting_for_warm_start() == [1] and book.live_count() == 2
    assert book.drop_waiting(5) == [1] and book.drop_waiting(1) == []
    book.hold_for_warm_start([1])
    book.add(1, "w1", _Future(book, ReplicaFigures(1, state="stopped")))  # launched: no longer waiting
    assert book.waiting_for_warm_start() == [] and book.next_index() == 2
