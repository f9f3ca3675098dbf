"""tuner's dashboard: pick a configuration by looking, then take it away.

Started by `tuner dashboard [--storage URL]`, which passes the database in the environment
variable TUNER_DASHBOARD_STORAGE. It only reads: the store (tuner's tables) and, for parameter
importance, Optuna's study in the same database.
"""

import sys
from pathlib import Path

import streamlit as st

# The pages import the shared drawing module that sits beside this file.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# The tab icon ships with the package: a Material icon name is drawn from a web font that an
# offline machine cannot fetch.
st.set_page_config(page_title="tuner", page_icon=str(Path(_HERE) / "icon.png"), layout="wide")

# Less empty space above each page's title than Streamlit's default.
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:2.5rem}</style>")

pages = [
    st.Page("views/overview.py", title="Studies", icon=":material/table_rows:", default=True),
    st.Page("views/study.py", title="Study", icon=":material/insights:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/choose.py", title="Choose", icon=":material/paid:"),
    st.Page("views/trial.py", title="Trial", icon=":material/science:"),
]
st.navigation(pages).run()
