"""Layer 4: a run under memscope. ``Run`` is the public handle (``run.py``); its options and their checks
(``options.py``), sampling loops, agents' wiring, end and Scalene side are the modules beside it.

This file imports none of them: ``memscope.session.options`` (what the CLI's parser needs) must not pull in the
whole engine. Import from the module: ``from memscope.session.run import Run``.
"""
