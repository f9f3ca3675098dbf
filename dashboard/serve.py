"""Starts Streamlit on app.py in this process (`tuner dashboard` runs it with Streamlit's own
`run` arguments), after the two things a first viewer would otherwise wait for: importing what
every page needs (pandas, Altair, SQLAlchemy, tuner's readers: about 1.5 s on 2 cores) and reading
the database's studies once (about 0.2 s per 2,500 trials). Streamlit runs each page as a script in
this same process, so both are already there when the first page is opened. A study that writes
later changes the database's version, and the next viewer reads it again."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tuner_ui  # noqa: E402  (the dashboard's folder must be on the path first)
from streamlit.web.cli import main  # noqa: E402

if __name__ == "__main__":
    tuner_ui.warm(tuner_ui.url())
    main(["run", *sys.argv[1:]], prog_name="streamlit")
