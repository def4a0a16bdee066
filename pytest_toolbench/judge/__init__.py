"""The second models: a judge for what matchers cannot say, and a simulated user.

Both are models the plugin asks itself, through the same client and wire adapters as the
model under test, and both are recorded in the case's cassette beside its exchanges
(``Interaction.role``), so replay serves their answers offline like the model's.

    prompts.py     the versioned prompt templates (templates/*.txt) and the transcript
                   of a conversation a judge reads
    second.py      SecondModel: one request to the judge or the simulator, recorded as its
    verdicts.py    a criterion judged: structured verdicts, samples and their majority,
                   every fault a judge error (fail closed)
    simulator.py   the simulated user's next message, or why it gave none
"""
