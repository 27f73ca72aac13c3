"""A bounded reader of the bash subset launch scripts use, read as bash reads it, never run.

The stages, each in its own module, lowest first:

* :mod:`~memsym.readers.shell.errors`: why a reading stops (refused, or undecided);
* :mod:`~memsym.readers.shell.lexer`: script text to tokens, each word to its parts;
* :mod:`~memsym.readers.shell.parser`: tokens to and-or lists, pipelines, ``if`` and groups;
* :mod:`~memsym.readers.shell.variables`: the variable store and the reading's budget;
* :mod:`~memsym.readers.shell.arith`: ``$((...))`` integer arithmetic;
* :mod:`~memsym.readers.shell.expansion`: parameter expansion and word splitting;
* :mod:`~memsym.readers.shell.interpreter`: the statements run on the tree (assignments,
  lists, ``if``, tests, builtins), the commands recorded, not run.

The front end, which finds the training command among those recorded, is
:mod:`memsym.readers.launch_script`; its module docstring lists the subset read.
"""
