"""The references' recipe room: the target writes the references to the prompts `draftlab.data.references` selects
(`recipe`), with its own AR engine, transformers' generate or OpenAI-compatible servers (`openai_engine`), in
resumable shards (`shards`)."""
