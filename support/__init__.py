"""What every package of the project needs and none owns: one-line messages (`support.text`), whether an
optional package imports (`support.optional`), and the environment variables the harness reads
(`support.environment`). It imports nothing of the project: every other package may import it."""
