"""What every package of the project needs and none owns: one-line messages (`support.text`), whether an
optional package imports (`support.optional`), the environment variables the harness reads
(`support.environment`), the checks every untrusted input gets (`support.inputs`) and "did you mean" for
an unknown name (`support.suggest`). It imports nothing of the project: every other package may import it."""
