"""The audit pages: views (`views`) and their forms (`forms`); the URLs are audit/urls.py, the templates
templates/audit/."""
