"""A figure gives up on a run stuck at chance accuracy (``AtChance``) through the job's ``give_up_when``: the
job finishes at that evaluation, saying why, and trains no further."""

from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run
from dbkit.sim.figures.fig4 import AtChance
from dbkit.telemetry import StateChange
from dbkit.training.evaluate import Evaluation


def at(accuracy: float) -> Evaluation:
    return Evaluation(train_loss=1.0, test_loss=1.0, test_accuracy=accuracy)


def test_at_chance_gives_up_only_after_the_whole_span_at_chance():
    rule = AtChance(chance=0.15, seconds=2.0)
    seen = [rule(t, at(a)) for t, a in ((0.0, 0.3), (1.0, 0.1), (2.0, 0.12), (2.5, 0.5),  # above chance: starts again
                                        (3.0, 0.1), (4.9, 0.15))]
    assert seen == [None] * 6 and rule.reason is None
    reason = rule(5.0, at(0.09))
    assert reason == rule.reason and "chance" in reason and "2.00 simulated s" in reason


def test_a_job_told_to_give_up_finishes_at_that_evaluation_and_says_why():
    evaluations: list[float] = []

    def third(t: float, evaluation: Evaluation) -> str | None:
        evaluations.append(t)
        return "told to, at the third evaluation" if len(evaluations) == 3 else None

    cfg = RunConfig.make(algorithm="downpour", model="linear", dataset="digits", replicas=2, shards=2, steps=3_000,
                         eval_every=100)
    run = simulated_run(cfg, Cluster("distbelief-2012"), give_up=third)
    report = run.run()
    assert len(evaluations) == 3 and run.state == "finished"
    assert report["steps"] < 3_000  # it trained no further than about the evaluation that gave up
    reasons = [e.reason for e in run.events.of(StateChange) if e.state == "finished"]
    assert reasons == ["gave up: told to, at the third evaluation"]
